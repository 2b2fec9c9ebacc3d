"""The suite's method declarations, one module per registry key (methods/declaration.py): read
without torch by every reader, grid check and planner; the adapter class is imported to train."""
