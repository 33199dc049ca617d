"""Issue 25: what a hostile tenant sends cannot wedge Colony or take another tenant's share."""
