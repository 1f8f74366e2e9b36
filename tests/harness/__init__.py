"""The suite's machinery, by stage; a stage imports only the stages before it in this list
(tests/test_harness_layers.py holds it to that):

- `observe`: what a run did, read back (its files, the observer's traces, a crash's cause);
  the located `Violation` every later stage speaks in;
- `run`: a command run as a run of the contract (the runner, which watches the traces; the
  run cache; containment; the box and its pressure; each run's timeline);
- `check`: pure checkers returning located violations (the invariants, the exercises, the
  mutant matrix's columns);
- `diagnose`: what the violations most likely mean (the feedback's likely causes);
- `report`: the session's report and grade file, the pictures, a class's CSV and summary;
- `platforms`: where classes are graded (a grading session per submission, PrairieLearn,
  submitit jobs).
"""
