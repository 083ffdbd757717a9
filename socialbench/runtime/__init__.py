"""The shared runtime every service is built on: settings, errors, RPC, stores, the app factory."""
