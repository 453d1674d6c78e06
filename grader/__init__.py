"""Instructor-only: hidden suites, scoring, isolation, reports and self-check."""
