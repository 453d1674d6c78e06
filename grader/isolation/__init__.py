"""Running untrusted student code: the sandbox, the worker inside it and the checker's client."""
