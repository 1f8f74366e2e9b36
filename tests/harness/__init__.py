"""The suite's machinery, in the order a grading goes through it:

- `run`: a command run as a run of the contract (the runner, the run cache, containment, the
  box and its pressure);
- `observe`: what a run did, read back (its files, the observer's traces, the timeline);
- `check`: pure checkers returning located violations (the invariants, the exercises, the
  mutant matrix's columns);
- `diagnose`: what the violations and a crash most likely mean;
- `report`: the session's report and grade file, the pictures, a class's CSV and summary;
- `platforms`: where classes are graded (a grading session per submission, PrairieLearn,
  rosters, submitit jobs).
"""
