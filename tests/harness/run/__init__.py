"""Running a command as a run of the contract: the runner, the run cache, containment
(namespaces, the run user), the box and its pressure, each run's timeline."""
