"""The orpheus example: its .walk file and toy node implementations."""
