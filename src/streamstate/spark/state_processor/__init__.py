"""The State Processor API on Spark DataFrames (public names: ``streamstate.state_processor``)."""
