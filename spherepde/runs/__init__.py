"""Runs: configuration (:mod:`.config`), shipped examples, run folders (:mod:`.runfolder`:
layout, marker, lock, checkpoints, snapshots, diagnostics), the run loop with checkpoints and
resume (:mod:`.runner`), parameter sweeps (:mod:`.sweep`), and the file and progress
helpers they share (:mod:`.files`, :mod:`.progress`)."""
