"""What the violations and a crash most likely mean (the feedback's likely causes)."""
