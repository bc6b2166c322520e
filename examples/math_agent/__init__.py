"""The math agent: a Strands agent with a calculator tool, in its deployment and RL forms."""
