"""Runs: configuration (:mod:`.config`), shipped examples, run folders with checkpoints and
resume (:mod:`.runner`), parameter sweeps (:mod:`.sweep`), and the file and progress
helpers they share (:mod:`.files`, :mod:`.progress`)."""
