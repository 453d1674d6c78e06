"""Instructor-only tools that make what students get: the starter generator (starter.py: starter/ from
solutions/), and the shipped model's corpus (corpus.py, with corpus_sources.py and corpus_text.py), training run
(train.py, with train_data.py and trainer.py) and model card (model_card.py). They build on assignment/ alone; the
student bundle (grader/release/) carries their products, never them."""
