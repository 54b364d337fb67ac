"""The vjepa2_ac example: its .walk file and toy node implementations."""
