"""`steptrace serve`: one engine behind an OpenAI-compatible HTTP endpoint (docs/serving.md).
The engine's thread steps it; an asyncio loop in another thread serves HTTP (aiohttp) and
hands requests over a thread-safe queue, as the replay's frontend does."""
