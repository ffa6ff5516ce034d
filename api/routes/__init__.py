"""Thin routes: validate, call a service, return."""
