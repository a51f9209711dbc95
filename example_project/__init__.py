"""Example: a satellite-imagery vegetation-risk pipeline with variably sized steps."""
