# The images of the Go binaries, for docker-compose.yml and the Helm chart, from
# one recipe: the build context is the Go module (core-go/ or bench/driver/,
# each holding all its build needs), the target the binary's image.
#   docker build -f infra/go.Dockerfile --target core -t aside-core core-go
#   docker build -f infra/go.Dockerfile --target load -t aside-load bench/driver
# Base images are pinned: the Go toolchain to a patch release, the runtime by digest.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Every command of the module (each has one), each into /out/<its name>.
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/...

# distroless static, nonroot (uid 65532): no shell, no package manager.
# To update both: crane digest gcr.io/distroless/static-debian12:nonroot
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab AS core
COPY --from=build /out/aside-core /aside-core
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/aside-core"]

FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab AS load
COPY --from=build /out/aside-load /aside-load
USER 65532:65532
ENTRYPOINT ["/aside-load"]
