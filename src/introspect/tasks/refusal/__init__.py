"""Refusal rates (task ``refusal``) and what removing a refusal direction changes: importing this
package registers the task."""

from introspect.tasks.refusal import task  # noqa: F401
