"""Running the stack as local processes: the store servers, nginx, the services."""
