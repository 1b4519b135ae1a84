"""The backend-neutral worker core and the job driver."""
