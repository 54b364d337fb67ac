"""The bagel example: its .walk file and toy node implementations."""
