# The kit's commands. `make demo` and `make test` are all a newcomer needs; both create the
# virtual environment first when it is missing or older than pyproject.toml.

PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
VENV_XLA    ?= .venv-xla
PY_XLA      := $(VENV_XLA)/bin/python
SUBMISSIONS ?= autograder/submissions
OUT         ?= build/grades
WORKERS     ?= $(shell nproc 2>/dev/null || echo 2)
GRADE_FLAGS ?=
DEVICES     ?= auto
NOTEBOOK    ?= 07_deployment
SEEDS       ?= 2000
SEED_BUDGET ?= 60
SEED_MIN    ?= 20
ROSTER      ?=
ITEMS       ?=

.PHONY: venv release publish grade export demo slides slides-check test test-fast test-xla accuracy contracts mutation bench gpu-check colab-rehearsal clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] < (3, 10))' || \
	  { echo "error: $(PYTHON) is older than 3.10; run 'make PYTHON=python3.11 ...'" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[course]"
	touch $@

## Student release of every notebook into build/release/<assignment>/<assignment>.ipynb (only what changed)
RELEASE_INPUTS := $(wildcard notebooks/*.ipynb) pyproject.toml \
  $(addprefix autograder/,nbgrader_config.py course.py grading/preprocessors.py \
    authoring/release.py authoring/colab_setup.py authoring/publish.py authoring/ta_notebook.py authoring/colab_grade.ipynb)
release: build/release-manifest.json

build/release-manifest.json: $(RELEASE_INPUTS) | venv
	$(PY) -m autograder.authoring.release
	touch $@

## Copy the release and the helper package into a checkout of the student repository: make publish DEST=<dir>
publish: release
	$(PY) -m autograder.authoring.publish "$(DEST)"

## Grade a class: make grade SUBMISSIONS=<dir>/<student>/<assignment>/*.ipynb OUT=<dir> [WORKERS=n] [DEVICES=auto|cpu,cuda|...]
grade: release
	$(PY) -m autograder.grade "$(SUBMISSIONS)" "$(OUT)" --workers $(WORKERS) --devices "$(DEVICES)" $(GRADE_FLAGS)

## Grades into an LMS: make export OUT=<graded class> ROSTER=roster.csv [ITEMS=items.csv] -> OUT/lms/canvas.csv, moodle.csv, grades-by-student.csv
export: venv
	$(PY) -m autograder.grading.export "$(OUT)" $(if $(ROSTER),--roster "$(ROSTER)") $(if $(ITEMS),--items "$(ITEMS)")

## Release, then grade the bundled sample submissions plus the blank release, and print the table
demo: release
	$(PY) -m autograder.grade autograder/submissions build/demo --with-blank --workers $(WORKERS) --cell-timeout 45

## Lecture slides of every notebook (executed, solutions and plots) into build/slides/
slides: venv
	$(PY) -m autograder.authoring.slides

## make slides, then every slide of every deck measured in headless Chromium on a 1280x720 projector: fits, no code cut off, no solution markers
slides-check: slides
	$(PY) -m autograder.verify.slide_fit

## Every test but tests/xla: the unit tests, then the pipeline tests (real grading runs, browsers; at most ~10 min)
test: venv
	$(PY) -m pytest

## The unit tests only (tests/unit: no grading run, no whole notebook; under 2 minutes), ruff included
test-fast: venv
	$(PY) -m pytest tests/unit

# The second environment: torch_xla pins torch 2.9.0 exactly, so the kit goes in without its dependencies
# and requirements-xla.txt brings the rest (about 7 GB: torch 2.9.0 from PyPI pulls CUDA libraries).
$(VENV_XLA)/.installed: requirements-xla.txt pyproject.toml
	test -x $(PY_XLA) || $(PYTHON) -m venv $(VENV_XLA)
	$(PY_XLA) -m pip install --quiet --upgrade pip
	$(PY_XLA) -m pip install --quiet -r requirements-xla.txt
	$(PY_XLA) -m pip install --quiet --no-deps -e .
	touch $@

## The TPU code path on torch_xla's CPU-backed xla device (PJRT_DEVICE=CPU): dlkit on xla, then the grader with --devices cpu,xla
test-xla: $(VENV_XLA)/.installed
	PJRT_DEVICE=CPU $(PY_XLA) -m pytest tests/xla

## Grade the held-out corpus (autograder/corpus/) and the sample submissions: correct answers get full marks, wrong ones lose points, each sample exactly its listed tests; prints both tables
accuracy: release
	$(PY) -m autograder.verify.accuracy build/accuracy
	$(if $(filter-out 0,$(SEEDS)),$(PY) -m autograder.verify.seed_sweep --with-corpus --seeds $(SEEDS) --budget $(SEED_BUDGET) --min-seeds $(SEED_MIN) --out build/accuracy/seed-sweep.md)

## Each exercise's domain (autograder/contracts/) against the calls its hidden tests make on the reference: every edge reached? make contracts [NOTEBOOK=02_backprop]; writes build/contracts/
contracts: venv
	$(PY) -m autograder.verify.contracts $(if $(filter command line,$(origin NOTEBOOK)),$(NOTEBOOK))

## First-order mutants of each exercise's reference against its hidden tests: make mutation [NOTEBOOK=02_backprop]; writes build/mutation/
mutation: venv
	$(PY) -m autograder.verify.mutation $(if $(filter command line,$(origin NOTEBOOK)),$(NOTEBOOK))

## Stock sequential nbgrader vs the kit at 1, 8 and 24 submissions, side by side, plus the fixed costs and the class report's similarity check for 1,000 x 40; writes bench/results.md (~16 min)
bench: release
	$(PY) -m bench.grading --workers $(WORKERS)

## On a machine with a CUDA GPU: run the torch notebooks on cpu,cuda, grade their samples, check; writes build/gpu-check/gpu-check.md
gpu-check: release
	$(PY) -m autograder.verify.gpu_check build/gpu-check

## Run a release notebook (reference answers) as Colab would: fresh venv without the kit, its setup cell installs the rest (network, minutes); writes build/colab-rehearsal/report.md
colab-rehearsal: release
	$(PY) -m autograder.verify.colab_rehearsal --notebook "$(NOTEBOOK)"

clean:
	rm -rf build
