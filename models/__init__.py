"""Colony's domain models: every workflow, activity, signal, update and query payload, and the rules that guard them."""
