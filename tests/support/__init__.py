"""What many test files share: helpers that are no test themselves (test-only)."""
