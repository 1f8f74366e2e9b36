"""Pure checkers: the invariants and the exercises, each returning located violations; the
mutant matrix's columns."""
