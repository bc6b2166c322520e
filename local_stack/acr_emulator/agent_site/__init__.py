"""The directory the ACR emulator puts first on an agent process's ``PYTHONPATH`` (see ``sitecustomize``)."""
