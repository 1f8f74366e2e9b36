"""Where classes are graded: one grading session per submission, PrairieLearn, submitit
jobs."""
