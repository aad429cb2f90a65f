"""A tiny module for the demo: what an agent's test run would exercise."""


def add(a, b):
    return a + b


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)
