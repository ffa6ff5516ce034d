"""The use cases behind the routes: keyword-only functions, one commit each."""
