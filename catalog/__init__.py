"""Ready-made content Colony ships: cluster template names and the workspace chart catalog."""
