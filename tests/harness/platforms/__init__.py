"""Where classes are graded: one grading session per submission, PrairieLearn, rosters,
submitit jobs."""
