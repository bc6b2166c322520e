"""Example agents built on ``agent_app``."""
