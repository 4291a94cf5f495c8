"""Steer's Textual console. Imports agent/; nothing imports it."""
