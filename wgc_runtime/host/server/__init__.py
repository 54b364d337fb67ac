"""The HTTP server of `wgc serve`: OpenAI-compatible routes, a native route for any model,
`/metrics`, and a playground, over the same conductor and workers as `wgc run`.

One module per concern:

=====================  =====================================================================
module                 owns
=====================  =====================================================================
`model`                what the served model takes and emits, hence which routes it gets
`gateway`              the asyncio connection to the conductor's client port
`calls`                one HTTP request's run: the door, the admission cap (429), the
                       deadline (504), cancelling on disconnect, the metrics it feeds
`media`                tensors as WAV/PCM, PNG, text, JSON; data URLs and uploads as tensors
`schemas`              the request bodies (pydantic models, hence the OpenAPI schema)
`openai_chat`          ``/v1/chat/completions``
`openai_media`         ``/v1/audio/speech``, ``/v1/images/generations``, ``/v1/images/edits``
`openai_params`        the OpenAI fields: mapped to the model's options, or refused (400)
`transcriptions`       ``/v1/audio/transcriptions`` (any model taking audio, emitting text)
`realtime`             ``/v1/realtime``: live transcription over a websocket
`native`               ``/v1/requests``: any model, segments in, every output out (SSE, NDJSON)
`metrics`              the Prometheus registry behind ``/metrics``
`playground`           the page at ``/`` and the plan drawing at ``/plan``
`auth`                 API keys: ``Authorization: Bearer`` on every route but ``/health``
`body_limits`          every body's size, pace, JSON depth and segment count, before parsing
`guard`                slow and hostile connections: the header timeout, the connection cap
`access_log`           one structured log line per request (``--log-format json|text``)
`app`                  the FastAPI application: routes, errors, ``/health``, ``/v1/models``
`main`                 starting the deployment and uvicorn (what `wgc serve` calls)
=====================  =====================================================================

Needs the ``serve`` extra (FastAPI, uvicorn, sse-starlette, prometheus-client, Pillow); this
package's ``__init__`` imports none of them.
"""
