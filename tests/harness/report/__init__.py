"""The session's report and grade file, the pictures, a class's roster, CSV and summary."""
