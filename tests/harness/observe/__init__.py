"""What a run did, read back: its files (the parser), the observer's traces, a crash's
cause; and the located Violation that every later stage speaks in."""
