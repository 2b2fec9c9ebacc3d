"""The contract checker prints each rule whole: the first paragraph of the check's docstring, on
one line, never cut where the docstring wraps."""
from __future__ import annotations

import inspect

import methods.contract as contract


def test_every_printed_rule_is_its_whole_first_paragraph() -> None:
    for check in contract.CHECKS:
        paragraph = " ".join((inspect.getdoc(check) or "").split("\n\n")[0].split())
        assert contract._rule_text(check) == paragraph and "\n" not in paragraph
    switch_off = contract._rule_text(contract.check_prototype_switch_off)
    assert switch_off.endswith("changes it unless that prototype contributes nothing.")


def test_the_checker_prints_the_whole_rule(capsys) -> None:
    assert contract.main(["protopnet", "-J", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    line = next(line for line in lines if "prototype switch off" in line)
    assert line.endswith("changes it unless that prototype contributes nothing.")
