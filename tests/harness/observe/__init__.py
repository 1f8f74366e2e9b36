"""What a run did, read back: its files (the parser), the observer's traces, the timeline."""
