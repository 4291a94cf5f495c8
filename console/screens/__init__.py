"""The console's screens: main, attempt detail, help, digest, and the small dialogs."""
