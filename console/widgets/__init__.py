"""The main screen's panels; each one repaints itself from a ConsoleModel when its version moved."""
