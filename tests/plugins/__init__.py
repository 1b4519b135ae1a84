"""Plug-ins defined in the test tree, registered only through lambdaml's public plug-in entry."""
