"""`colonyctl`, the command line that starts, steers and watches Colony's workflows."""
