"""The Streamlit side of AMP Lab: session glue and widgets (these import streamlit), and chart, table and
interpretation builders that do not, so they can be tested alone."""
