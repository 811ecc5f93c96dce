"""The contracts in Python: cache keys and value formats, input rules, error
codes, the routes and the hand-off between the two layers, the OpenAPI
document."""
