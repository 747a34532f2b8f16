# One image for every Trainwatch service; the command picks the service:
#   docker run trainwatch python -m trainwatch_watcher
FROM python:3.11-slim AS build
RUN pip install --no-cache-dir uv
WORKDIR /app
COPY pyproject.toml uv.lock ./
COPY libs libs
COPY services services
RUN uv sync --frozen --no-dev --no-editable

FROM python:3.11-slim
RUN useradd --system --uid 10001 trainwatch
COPY --from=build /app/.venv /app/.venv
ENV PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1
USER trainwatch
EXPOSE 8000
CMD ["python", "-m", "trainwatch_watcher"]
