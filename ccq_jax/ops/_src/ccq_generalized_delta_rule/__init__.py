"""The generalized delta rule read with the CCQ-cleaned query, for the op and each named member of its family."""
