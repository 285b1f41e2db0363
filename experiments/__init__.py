"""``python -m experiments.<module>``: the ``introspect`` commands from a clone of the repository.

Each module here is a thin wrapper over ``introspect.cli.<module>`` (the installed
``introspect <command>`` runs the same code with the same arguments); ``presets`` links to the
package's shipped presets.
"""
