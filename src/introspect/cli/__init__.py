"""The command line: ``introspect <command>`` (``main.py``), one module per command.

Why in the package: an installed toolkit must run from any folder, with its presets
(``presets/*.yaml``) as package data. The repository's ``python -m experiments.<module>``
entry points are thin wrappers over these modules. This room sits on top of every other one and
nothing below imports it; importing it loads no torch (commands import what they need).
"""
