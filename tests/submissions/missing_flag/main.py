"""A student's submission whose command line lacks a flag of the contract (--checkpoint-every):
every run exits 2 before it trains."""

import argparse

parser = argparse.ArgumentParser()
for flag in ("--out", "--world-size", "--steps", "--seed", "--batch-size", "--resume",
             "--inject"):
    parser.add_argument(flag)
args = parser.parse_args()
