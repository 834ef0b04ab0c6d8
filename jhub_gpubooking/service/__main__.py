"""``python -m jhub_gpubooking.service``: same as the ``jhub-gpubooking-service`` command."""

from .app import main

if __name__ == "__main__":
    main()
