# The app on the embedded default model, CPU only. Build: docker build -t lenscope .
# Run: docker run -p 8501:8501 -v lenscope-data:/app/cache/data lenscope
# (/app is a checkout installed editable, so its data dir is /app/cache/data: README, Install as a package.)
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends make chromium \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt requirements-embedded.txt requirements-test.txt ./
# The CPU index keeps torch==2.13.0 a CPU build (PyPI's default Linux wheel is the CUDA one). The test tools
# (requirements-test.txt) too, so that `docker run lenscope make test-fast` needs no download for them.
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt \
        -r requirements-test.txt \
    && pip install --no-cache-dir --no-deps -r requirements-embedded.txt
COPY . .
RUN pip install --no-cache-dir --no-deps -e .
EXPOSE 8501
# Hub ids load from the image's cache only; `docker run -e HF_HUB_OFFLINE=0 ...` lets the app download.
ENV HF_HUB_OFFLINE=1
CMD ["python", "-m", "streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501", \
     "--server.headless=true", "--browser.gatherUsageStats=false"]
