"""What the violations most likely mean (the feedback's likely causes)."""
