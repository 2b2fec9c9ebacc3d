"""``protobench leaderboard``: results from many labs' bundles, verified, re-scored, aligned into
entries (:mod:`.entries`), ranked with statistical ties (:mod:`.ranking`), and written as a
versioned JSON document with its schema (:mod:`.document`), tables (:mod:`.tables`), an offline
page (:mod:`.page`) and the Hub's ``eval.yaml`` (:mod:`.hub`)."""
