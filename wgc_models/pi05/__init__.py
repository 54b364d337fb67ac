"""The pi05 example: its .walk file and toy node implementations."""
