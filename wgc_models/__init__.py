"""Example model families; each folder holds a .walk file and its node implementations."""
