"""The Flask app, run in a worker's threads by a2wsgi: the app factory and its
ops routes, the /api/v1 and tracks blueprints, the write token, the error
answers."""
