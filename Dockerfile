# connscale's BIDS-App in a container, as BIDS-Apps run:
#   docker build -t connscale .                     # from the repository root (a git checkout)
#   docker run --rm --gpus all -v /data/derivatives/fmriprep:/data:ro -v /data/out:/out \
#       connscale /data /out participant --participant-label 01
# The entry point is `connscale bids`: the arguments after the image are its arguments.
# The base image is PyTorch's CUDA runtime image (torch built for CUDA, with its triton); the
# same image runs on a host without a GPU (--device auto falls back to the CPU).
ARG BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

# The wheel, built from the checkout; its version comes from the git tags (setuptools-scm),
# so the build context keeps .git (see .dockerignore).
FROM python:3.11-slim AS wheel
RUN apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir "build>=1.2" "setuptools>=77" "setuptools-scm>=8"
COPY . /src
RUN git config --global --add safe.directory /src \
    && python -m build --wheel --no-isolation --outdir /dist /src

FROM ${BASE}
COPY --from=wheel /dist/ /tmp/dist/
# [bids]: TemplateFlow's atlases (--atlas NAME); [gpu]: triton (already in the base image).
RUN pip install --no-cache-dir "$(ls /tmp/dist/connscale-*.whl)[bids,gpu]" && rm -rf /tmp/dist
# Matplotlib's cache where any user (docker run -u UID) can write it.
ENV MPLCONFIGDIR=/tmp/matplotlib
ENTRYPOINT ["connscale", "bids"]
