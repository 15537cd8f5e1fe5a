"""What every tool shares: a model folder's files and loading, the Hub connection, and the optional extras."""
